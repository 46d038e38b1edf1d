"""What a learner sees: matplotlib figures (plots), the browser-drawn views (views/, each a Python class and
an ES module), the ipywidgets apps that put them together (widgets), and the %%needs magic (magics)."""
