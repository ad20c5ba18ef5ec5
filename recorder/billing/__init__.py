"""Billing: what the recorded streams cost, and how that compares with the
providers' own numbers. Pure: the store reads and writes for it
(:mod:`recorder.store.audit_sql`, :mod:`recorder.store.reprice_sql`,
:mod:`recorder.store.reconcile_sql`).

- :mod:`recorder.billing.audit`: usage and cost grouped (`recorder audit`);
- :mod:`recorder.billing.reprice`: stored streams costed again with another
  price table, and the report of what changed (`recorder reprice`);
- reconciliation (`recorder reconcile`):

  - :mod:`recorder.billing.export_model`: an export, read (its rows, the figures
    it covers), and the cell readers the formats share;
  - :mod:`recorder.billing.export_formats`: the export formats, told apart by
    their columns;
  - :mod:`recorder.billing.export_csv`: an export from a CSV file;
  - :mod:`recorder.billing.usage_api`: the JSON pages the providers' usage and
    cost APIs return, read as returned (one page or many);
  - :mod:`recorder.billing.exports`: any export file or directory of pages, CSV
    or JSON, as one export;
  - :mod:`recorder.billing.id_mapping`: the mapping file (provider ids to ours);
  - :mod:`recorder.billing.recorded_streams`: what reconciliation needs of a
    recorded stream;
  - :mod:`recorder.billing.comparison`: both sides grouped and compared within a
    tolerance;
  - :mod:`recorder.billing.reconcile_report`: the groups beyond tolerance as
    printed, with the streams that may explain them;
  - :mod:`recorder.billing.key_hints`: the providers' list-keys responses matched
    to the recorder's key fingerprints by the characters both show;
  - :mod:`recorder.billing.fetch`: the usage and cost APIs asked and paged
    through (``recorder reconcile --fetch``).

Money is :mod:`recorder.core.money`: exact, printed with twelve places.
"""
