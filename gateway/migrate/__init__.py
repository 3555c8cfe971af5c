"""Moving a group between products: compare two policies (`plan`), and move what a group holds
between naming schemes on one gateway (`rename`) and between brokers and gateways (`copy`).

Product-neutral: what each product calls things and what tunes its policies comes from the
traits its dialect registers (`gateway.core.traits`); broker sides of a copy come from the
products (`gateway.product`).
"""
