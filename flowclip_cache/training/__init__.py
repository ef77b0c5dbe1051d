"""Training: heads trained from the store's features, and the encoders adapted with them.

Reads a training manifest and the store (through `store.banks`); writes a run folder
(config, checkpoints, the finished head: `run_folder.py`). Entry point: `loop.py`
(`train_head`, the train loop read top to bottom); `adapt.py` is the unfrozen path (both
encoders and a head, one process or many over `ranks.py`), `pretrain.py` the tiny CLIP's
own pretraining."""
