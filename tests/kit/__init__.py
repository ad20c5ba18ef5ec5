"""The test kit: what more than one test module needs, in modules named for what
they hold. Test modules import from here, from recorder and from libraries, never
from one another; tests/conftest.py registers the kit's fixtures.

- ``databases``: SQLite and PostgreSQL stores per test (``db_url`` …) and helpers
  to look into them (``count_rows``, ``outage``, ``spool_files`` …);
- ``records``: the record factories (``simple_record``, ``full_record`` …);
- ``prices`` / ``billing``: price tables and the billing tests' oracles;
- ``cli``: the ``cli`` fixture, `recorder` run in-process through ``main()``;
- ``terminal``: a real terminal (tmux) whose screen and title a test reads;
- ``hostile``: a model name built to attack the terminal it is printed on;
- ``processes``: `recorder proxy`, `mitmdump -s`, `mitmweb -s` as subprocesses;
- ``proxy_thread``: mitmproxy with the recorder on a thread (``running_proxy``);
- ``flows``: the addon's hooks driven with mitmproxy's test flows and a fake clock;
- ``traffic``: simulated traffic for the metrics tests, and one real request;
- ``exchanges``: a raw HTTP/1.1 client for the end-to-end fault tests;
- ``proxy_faults``: `recorder proxy` against a store that fails (forwarder, stores);
- ``tls``: a certificate the tests' upstream serves;
- ``upstreams``: a private certificate authority and a counting forward proxy;
- ``framing``: the fixtures under tests/fixtures as the wire carries them;
- ``usage``: the providers' usage objects, as they send them;
- ``ports``, ``pgcluster``, ``phoenix``, ``recorded_api``: free ports, a private
  PostgreSQL cluster, Arize Phoenix, the providers' usage APIs replayed.
"""
