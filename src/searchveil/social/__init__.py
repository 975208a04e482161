"""Private social recommendations (Korolova 2012 thesis, chapter 5)."""
