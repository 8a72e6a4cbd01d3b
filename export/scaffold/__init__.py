"""``python -m export.scaffold KIND NAME ...``: a new model's description, its generated configs and
the folders and links they need (cli.py, with one module per kind of request).
"""
