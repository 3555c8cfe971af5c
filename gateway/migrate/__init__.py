"""Moving a group between products: compare two policies (`plan`), and move what a group holds.

Product-neutral: what each product calls things and what tunes its policies comes from the
traits its dialect registers (`gateway.core.traits`).
"""
