#pragma once
/// @file version.hpp
#define REDISLOCK_VERSION_MAJOR 0
#define REDISLOCK_VERSION_MINOR 2
#define REDISLOCK_VERSION_PATCH 0
