"""The model factory and its registries: ``init_model`` (a config -> a model) and
``model_from_checkpoint`` (the same with trained weights)."""
from wenet.models.factory import (DECODERS, ENCODERS, init_model, is_transducer_config,
                                  model_from_checkpoint)
from wenet.models.losses import LOSSES

__all__ = ["DECODERS", "ENCODERS", "LOSSES", "init_model", "is_transducer_config",
           "model_from_checkpoint"]
