"""Job entry points: functions of ours that run inside isolated children (see engine.runner)."""
