"""Billing against the providers' own numbers.

- :mod:`recorder.billing.usage_api`: the JSON pages the providers' usage and
  cost APIs return, read as returned (one page or many);
- :mod:`recorder.billing.exports`: any export file or directory of pages, CSV or
  JSON, as one :class:`recorder.reconcile.Export`;
- :mod:`recorder.billing.key_hints`: the providers' list-keys responses matched
  to the recorder's key fingerprints by the characters both show;
- :mod:`recorder.billing.fetch`: the usage and cost APIs asked and paged through
  (``recorder reconcile --fetch``).

The comparison itself is :mod:`recorder.reconcile`.
"""
