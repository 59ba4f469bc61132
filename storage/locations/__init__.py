"""Where things live: local paths, fsspec URLs and object stores.

fsspec paths and shard discovery (:mod:`~asepr.storage.locations.fs`), an output's trees on a
local disk or under an object-store prefix (:mod:`~asepr.storage.locations.location`), what a
remote output needs beyond fsspec (:mod:`~asepr.storage.locations.remote`) and run-private files
written past the page cache (:mod:`~asepr.storage.locations.direct_io`).
"""
