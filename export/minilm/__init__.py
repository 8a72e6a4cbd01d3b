"""The sentence_encoder kind: BERT-family encoders such as all-MiniLM-L6-v2 (network.py), their export and
checks (kind.py), and their reduced-precision variants (variants.py, per_token_int8.py). The ragged
encoder's warm-up samples are written by export/text_warmup.py, a command of its own.
"""
