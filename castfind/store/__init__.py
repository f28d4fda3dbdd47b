"""Which files there are and what is known of them: discovery, the index (bytes, content keys), the cache, the
worker pool, dependency tracking (memo), the text queries, module names, git trees.
"""
