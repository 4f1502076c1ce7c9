"""Telling someone: one message per event, posted to an incoming webhook (`webhook.py`); no Dagster here (the sensors
that decide what to tell live in `orchestration/alerts.py` and `orchestration/late_audio.py`)."""
