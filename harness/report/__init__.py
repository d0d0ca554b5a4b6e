"""Floor 5, the compatibility matrix as a report (tools/report.py is its command line): the
matrix as data, the pre-upgrade comparison, the sections and their charts, and the writers."""
