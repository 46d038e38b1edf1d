"""Decoding and serving on the model: the decode loop and its picks and stops (generate), the pool of KV
blocks with its prefix index (blocks), many sequences' block tables over it (paged_cache), batched decoding
(batching), a stream of requests served on it (serving), the prompt cache, a provider's policy over the
same pool (prompt_cache); and beside kvlib's own server, llama.cpp's (llamacpp) and a client for any
OpenAI-compatible endpoint (endpoint). It imports the model and the base, never a lesson or a screen."""
