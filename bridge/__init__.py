"""The bridge: the Discord side of the tree, which admits messages, holds the turns they become and posts the replies."""
