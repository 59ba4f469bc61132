"""Where things live: local paths, fsspec URLs and object stores.

fsspec paths and shard discovery (:mod:`~storage.locations.fs`), an output's trees on a
local disk or under an object-store prefix (:mod:`~storage.locations.location`), what a
remote output needs beyond fsspec (:mod:`~storage.locations.remote`) and run-private files
written past the page cache (:mod:`~storage.locations.direct_io`).
"""
