#!/bin/bash
# Healthy once the broker answers a Kafka request (ApiVersions v0, correlation id 1) on 9092:
# an open port alone is not enough, the socket is bound before the broker serves requests.
# Pure bash: a JVM per check would cost a core-second every few seconds.
exec 3<>/dev/tcp/127.0.0.1/9092 || exit 1
printf '\x00\x00\x00\x0a\x00\x12\x00\x00\x00\x00\x00\x01\x00\x00' >&3
# The answer: int32 size, int32 correlation id (1), int16 error code (0).
answer=$(timeout 5 head -c 10 <&3 | od -An -tx1 | tr -d ' \n')
[ "${answer:8:12}" = "000000010000" ]
