"""Audio probing and decoding to the pipeline's one format: 16 kHz mono float32."""
