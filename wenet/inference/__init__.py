"""Using a trained model: the one model loader (a model dir or train.yaml + checkpoint ->
``LoadedModel``), the inference feature pipeline, the batch ``Recognizer`` API and the
streaming recognizer that serving builds on."""
