"""Kafka's protocol, read from Kafka's own jars: the generator of the gateway's protocol data.

Run it as ``scripts/kafka-protocol`` (see its ``--help``). It fetches the jars of the
releases in ``RELEASES`` from Maven Central (``maven.py``), reads their message specs
(``common/message/*.json`` in every ``kafka-clients`` jar since 2.2) and writes the
package data the gateway and featurectl read at run time. The install needs no Maven:
the output is committed.
"""
