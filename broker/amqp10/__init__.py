"""AMQP 1.0 (OASIS/ISO), beside 0-9-1 on the same ports and over the same broker core.

The listener reads the 8-byte protocol header; an AMQP 1.0 one hands the socket to a
:class:`~broker.amqp10.connection.Connection` (:mod:`broker.amqp.protocol`). Layers, each
sans-I/O (bytes or values in, bytes or values out), bottom up:

- :mod:`.types`, :mod:`.codec`: the type system and its encoding (ours: why, in
  :mod:`.codec`); :mod:`.composite`: described lists with named, typed fields;
- :mod:`.performatives` (open ... close, SASL, delivery states, termini),
  :mod:`.sections` (a message's sections), :mod:`.framing` (headers, frames);
- :mod:`.connection` (open/close, heartbeats and time-outs with 0-9-1's
  :mod:`broker.amqp.timeouts`, errors in their scope: :mod:`.errors`; the headers and SASL
  in its :mod:`.sasl_layer`, over :mod:`.sasl`; its sessions in :mod:`.sessions`),
  :mod:`.session` (windows, attach, dispositions; the links a terminus names:
  :mod:`.termini`), :mod:`.receiver` (the client publishes: credit, the confirm holds
  0-9-1's publishes take), :mod:`.sender` (the client consumes: a queue consumer with
  credit) and :mod:`.coordinator` (transactions: declare, discharge, through the commit
  core both protocols use, :mod:`broker.core.transaction`);
- :mod:`.addresses` (what a terminus names), :mod:`.mapping` (a 1.0 message as the 0-9-1
  message the broker stores, and back: RabbitMQ 4's mapping).

No 1.0 path goes through the 0-9-1 Channel: links publish through
``VirtualHost.publish`` and consume as ``Queue`` consumers, the broker core both protocols
share. docs/amqp-1-0.md says what is there and what is not yet.
"""
