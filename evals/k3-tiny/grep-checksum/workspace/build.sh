#!/bin/sh
make all
