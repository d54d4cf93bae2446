"""Process set-up shared by every process a run starts (settings and supervision live here too)."""
