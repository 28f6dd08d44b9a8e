"""The shape check: the params' shapes against the symbol's, with the guess of a missing input
shape and the messages that name the mismatch. Imports the core, io and passes.kernel only."""
