"""Graph -> Graph passes."""
