"""RNN-T (transducer) model: prediction network, joint network, loss and searches."""
