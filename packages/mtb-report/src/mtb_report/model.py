"""The report as data: sections of titled tables, rendered alike by every format."""

import attrs


@attrs.frozen
class Table:
    title: str
    columns: tuple[str, ...]
    rows: list[list[str]]
    notes: list[str] = attrs.field(factory=list)

    def __attrs_post_init__(self):
        widths = {len(row) for row in self.rows} - {len(self.columns)}
        if widths:
            raise ValueError(f"table {self.title!r}: rows of {widths} cells for {self.columns}")


@attrs.frozen
class Section:
    """One environment: only results measured in it share its tables."""

    title: str
    warnings: list[str]
    tables: list[Table]
    documents: list[dict]


@attrs.frozen
class Report:
    warnings: list[str]
    sections: list[Section]
