"""The efficientnet_lite kind: EfficientNet-Lite image classifiers (network.py), their export and checks
(kind.py) and their reduced-precision variants (variants.py).
"""
