"""Prometheus's text exposition format read in Spark: a dataset's text lines become
samples (``featurectl.plan.transforms`` takes them from there). Pure: frames in, frames out.

Frames and their columns:

* lines: ``source`` (``<round>/<name>``, see ``scrape_key``), ``line`` (one text line)
* scrapes: ``source``, ``gateway_id``, ``scrape_time_ms`` (from the file paths)
* split lines: ``metric``, ``label_text`` (as written), ``value``, ``line_ts_ms``
* samples: ``ts``, ``gateway_id``, ``metric``, ``labels`` (map) or ``label_text``, ``value``

Every function runs under Spark's ANSI mode (the 4.x default): values that do not parse
become null (``try_cast``) and their lines are dropped instead of failing the job.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

# A label pair ``name="value"`` where the value may hold \\, \" and \n escapes.
_LABEL_PAIR = r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"'
# Marks an escaped backslash while the other escapes are undone (cannot occur in text).
_PLACEHOLDER = "\u0000"


def scrape_key(path: Column) -> Column:
    """``<round>/<name>`` of a dataset file's path (any scheme): the join key."""
    tail = F.substring_index(path, "/", -2)
    extension = F.substring_index(tail, ".", -1)
    return tail.substr(F.lit(1), F.length(tail) - F.length(extension) - 1)


def _unescape(value: Column) -> Column:
    """Undo the exposition format's escapes (\\\\, \\" and \\n) in a label value."""
    undone = F.replace(value, F.lit("\\\\"), F.lit(_PLACEHOLDER))
    undone = F.replace(undone, F.lit('\\"'), F.lit('"'))
    undone = F.replace(undone, F.lit("\\n"), F.lit("\n"))
    return F.replace(undone, F.lit(_PLACEHOLDER), F.lit("\\"))


def is_sample_line(line: Column) -> Column:
    """Not blank and not a comment: what ``split_samples`` turns into a sample."""
    return (F.length(F.trim(line)) > 0) & ~F.trim(line).startswith("#")


def starts_with_metric(line: Column, metrics: Sequence[str]) -> Column:
    """A cheap pre-filter: the line starts with one of ``metrics`` and a separator.

    Most lines of a scrape are metrics the planner does not read (responses, latency
    buckets); dropping them before splitting saves most of the parse.
    """
    keep = F.lit(False)
    for metric in metrics:
        for after in ("{", " "):
            keep = keep | line.startswith(metric + after)
    return keep


def split_samples(lines: DataFrame) -> DataFrame:
    """Prometheus text format lines → ``metric``, ``label_text``, ``value``, ``line_ts_ms``.

    A line is ``name{a="x",b="y"} value [timestamp_ms]``; comments (``# HELP``/``# TYPE``), blank
    lines and lines whose value does not parse are dropped. Other columns of ``lines``
    (but ``line``) are carried through. Plain string functions, no pattern matching: this runs on
    every line of the dataset, and labels are parsed later for the lines still wanted.

    Each ``select`` is a stage on purpose: Spark does not merge a stage into the next
    when that would compute a non-trivial expression twice.
    """
    others = [c for c in lines.columns if c != "line"]
    text = lines.select(*others, F.trim("line").alias("line")).where(
        (F.length("line") > 0) & ~F.col("line").startswith("#")
    )
    line = F.col("line")
    # A value or timestamp never holds "{" or "}": after the last "}" come only those.
    labelled = F.instr(line, "{") > 0
    split = text.select(
        *others,
        line,
        labelled.alias("labelled"),
        F.when(labelled, F.substring_index(line, "}", -1)).alias("tail"),
    )
    head = line.substr(F.lit(1), F.length(line) - F.length("tail") - 1)
    # "name{labels} 1 2" → "} 1 2" → ["}", "1", "2"]; "name 1 2" → ["name", "1", "2"].
    tokens = F.array_remove(
        F.split(
            F.translate(
                F.when(F.col("labelled"), F.concat(F.lit("}"), "tail")).otherwise(line), "\t", " "
            ),
            " ",
        ),
        "",
    )
    pieces = split.select(
        *others,
        F.when(F.col("labelled"), head).alias("head"),
        F.when(~F.col("labelled"), F.substring_index(line, " ", 1)).alias("bare_name"),
        tokens.alias("tokens"),
    )
    name = F.coalesce(F.substring_index("head", "{", 1), "bare_name")
    return pieces.select(
        *others,
        name.alias("metric"),
        F.coalesce(
            F.col("head").substr(F.length(F.substring_index("head", "{", 1)) + 2, F.lit(1 << 30)),
            F.lit(""),
        ).alias("label_text"),
        F.try_element_at("tokens", F.lit(2)).try_cast("double").alias("value"),
        F.try_element_at("tokens", F.lit(3)).try_cast("long").alias("line_ts_ms"),
    ).where(F.col("value").isNotNull() & (F.col("metric") != ""))


def parse_labels(samples: DataFrame) -> DataFrame:
    """``label_text`` (``a="x",b="y"``) → ``labels`` map.

    Without a backslash no value can hold a quote (it would be escaped), so ``",``
    separates pairs and ``="`` a name from its value: the common case splits without a
    regex. Text with escapes or whitespace between pairs takes the regex path.
    """
    text = F.col("label_text")
    trimmed = F.when(text.endswith(","), text.substr(F.lit(1), F.length(text) - 1)).otherwise(text)
    simple = (F.instr(text, "\\") == 0) & (F.instr(text, " ") == 0) & (F.instr(text, "\t") == 0)
    fast = F.str_to_map(trimmed.substr(F.lit(1), F.length(trimmed) - 1), F.lit('",'), F.lit('="'))
    slow = F.map_from_arrays(
        F.regexp_extract_all(text, F.lit(_LABEL_PAIR), 1),
        F.transform(F.regexp_extract_all(text, F.lit(_LABEL_PAIR), 2), _unescape),
    )
    labels = (
        F.when(F.length(text) == 0, F.create_map().cast("map<string,string>"))
        .when(simple, fast)
        .otherwise(slow)
    )
    return samples.withColumn("labels", labels).drop("label_text")


def parse_exposition(lines: DataFrame) -> DataFrame:
    """``split_samples`` then ``parse_labels``: ``metric``, ``labels``, ``value``, ..."""
    return parse_labels(split_samples(lines))


def attach_scrapes(parsed: DataFrame, scrapes: DataFrame) -> DataFrame:
    """Samples with their gateway and time: the line's timestamp, else the scrape's.

    Lines of files without a row in ``scrapes`` (outside the dataset layout) are dropped.
    ``labels`` or ``label_text``, whichever ``parsed`` has, is carried through.
    """
    carried = [c for c in ("labels", "label_text") if c in parsed.columns]
    return parsed.join(F.broadcast(scrapes), "source").select(
        F.timestamp_millis(F.coalesce("line_ts_ms", "scrape_time_ms")).alias("ts"),
        "gateway_id",
        "metric",
        *carried,
        "value",
    )


__all__ = [
    "attach_scrapes",
    "is_sample_line",
    "parse_exposition",
    "parse_labels",
    "scrape_key",
    "split_samples",
    "starts_with_metric",
]
