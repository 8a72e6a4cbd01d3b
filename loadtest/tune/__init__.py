"""Tune the local repository's CPU settings with Triton Model Analyzer (``python -m loadtest.tune``).

plan.py says what is searched, analyzer.py runs Model Analyzer in its local launch mode against the pip
wheel's tritonserver, results.py reads its tables and chooses the winners, report.py writes the summary
beside Model Analyzer's own outputs, adopt.py writes a winner where ``tritonrepo derive`` reads it.
"""
