#!/bin/sh
sha256sum -c checksum.list
