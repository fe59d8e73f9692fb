"""The picture hosts: one shared host runtime and the two processes on it, the browser and tldraw."""
