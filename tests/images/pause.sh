#!/bin/sh
# stand-in for the pod "pause" container: holds the namespaces, exits at once on TERM/INT
trap 'exit 0' TERM INT
while :; do sleep 3600 & wait $!; done
