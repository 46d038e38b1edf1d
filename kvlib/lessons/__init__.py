"""What each notebook shows, computed: one module per topic (loop, tokenization, embeddings, attention,
cache_evidence, memory, pricing, routing, leak, longcontext, compression, paging, sharing, engine_probe), the
timings the notebooks share with the benchmark (speed), and each notebook's exercises (exercises/). The
modules compute and never draw (the pictures are in kvlib.ui); an exercise shows its verdict in a widget."""
