"""The conversion report: its model (ConversionReport), its tables rendered to text and HTML,
and the picture of the converted graph (SVG, DOT, PNG). Imports the core and the conversion
records; never auto (the CLI passes auto's sections in)."""
