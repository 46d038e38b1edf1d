"""Commands around the course, each run as `python -m kvlib ...` or by hand: the static site and its live
pages (site, with site.js, site.css and live.js; webmodel, the page's model in ONNX), the benchmark suite
(bench), the pre-workshop check (doctor), the one path to the network (download), the course copied out of
the wheel (course) and the bundled model's recipe (train_tiny)."""
