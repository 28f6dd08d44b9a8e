"""What the automatic mode's checks run under and what they leave behind: the immutable
run configuration (:mod:`.config`) and the search log (:mod:`.log`); the executor between
them is :class:`mxnet_amp.auto.runner.Runs`."""
