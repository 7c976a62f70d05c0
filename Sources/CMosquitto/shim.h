#pragma once
// libmosquitto 2.0 (Debian libmosquitto-dev). mqtt_protocol.h brings the MQTT v5 property and reason-code
// constants (MQTT_PROP_*, MQTT_RC_*), which mosquitto.h alone does not declare.
#include <mosquitto.h>
#include <mqtt_protocol.h>
