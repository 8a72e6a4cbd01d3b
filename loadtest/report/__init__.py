"""The report layer: results.json in, report.md and its plots out (:mod:`loadtest.report.markdown`)."""
