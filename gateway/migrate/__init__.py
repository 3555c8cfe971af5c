"""Moving a group's messages: between naming schemes on one gateway (`rename`) and between
brokers and gateways (`copy`), for `gateway migrate rename` and `gateway migrate copy`."""
