"""The compatibility matrix as a report (tools/report.py is its command line): the
sections (sections, parity, optim), the charts, and the writers (md, html, data)."""
