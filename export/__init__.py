"""Export the served models from their weights into the model repository.

``python -m export [--only NAME] [--force]`` runs every model description
(model_descriptions/*.yaml) through one
pipeline (export/pipeline.py): each served file is written next to its config.pbtxt after checking it
against eager PyTorch on real inputs.
"""
