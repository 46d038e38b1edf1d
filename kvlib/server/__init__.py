"""Decoding and serving on the model: how a sequence picks its tokens and stops (sampling), the pool of KV
blocks with its prefix index (blocks), many sequences' block tables over it (paged_cache), the step and its
one loop (batching), the user's calls on it, one prompt or a batch (generate), a stream of requests served
on it (serving), the prompt cache, a provider's policy over the same pool (prompt_cache); and beside kvlib's
own server, llama.cpp's (llamacpp) and a client for any OpenAI-compatible endpoint (endpoint). It imports
the model and the base, never a lesson or a screen."""
