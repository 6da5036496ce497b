#!/bin/bash
# named-temp path: /proc hidden so O_TMPFILE publication is not used
cd /tmp/s59/auditP
