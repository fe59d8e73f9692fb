"""The supervisor: process tree, restart policy, stall watchdog, sd_notify, control socket, clankiectl."""
