"""Engine rules on the in-memory back end with a manual clock: no sockets, no sleeping."""
