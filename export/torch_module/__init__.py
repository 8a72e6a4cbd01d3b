"""The torch_module kind: any torch.nn.Module a description names, exported as it is (kind.py), checked
against eager PyTorch (checks.py), with its reduced-precision variants (variants.py).
"""
