#include <gtest/gtest.h>
#include "lockstep/core/error.h"
TEST(Error, Placeholder) { EXPECT_THROW(LOCKSTEP_CHECK(false, "x"), lockstep::ValueError); }
