"""The engine: subscriptions, dispatch, flow control, timers and settlement over a back end."""
