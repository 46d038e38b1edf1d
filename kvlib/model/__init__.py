"""The model and its cache: GPT-2's and Llama's forward passes as pure functions (gpt2, llama), the KV cache
they append to (kv_cache), what a trace records (trace), how a name becomes weights and a forward pass
(models), the weights mapped once per machine (weights_file), and how a model's work is measured (measure).
It imports nothing above it: no server, no lesson, no screen."""
