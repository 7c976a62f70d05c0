#pragma once
#include <nats/nats.h>
