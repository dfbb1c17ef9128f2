"""The optimizers, one module per family over the protocol and registry of :mod:`crfkit.optim.stochastic`
(the full-batch ones: :mod:`crfkit.optim.lbfgs`, :mod:`crfkit.optim.owlqn`)."""
