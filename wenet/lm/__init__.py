"""Language models: n-gram training (modified Kneser-Ney), ARPA reading and writing, and
the interpolation of several n-grams (used by CTC prefix search fusion, wenet.decode.ctc_lm)."""
