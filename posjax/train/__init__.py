"""Training: pure steps, optimizer, checkpoints, sharding and the stage-running trainer."""
