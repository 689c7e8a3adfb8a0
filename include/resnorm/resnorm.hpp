// resnorm/resnorm.hpp — everything in resnorm. Includes only.
#pragma once

#include "resnorm/add_norm.hpp"
#include "resnorm/differentiable_map.hpp"
#include "resnorm/finite_difference.hpp"
#include "resnorm/gelu.hpp"
#include "resnorm/kernels/gelu_kernel.hpp"
#include "resnorm/kernels/layer_norm_kernel.hpp"
#include "resnorm/kernels/rms_norm_kernel.hpp"
#include "resnorm/layer_norm.hpp"
#include "resnorm/linear.hpp"
#include "resnorm/matrix.hpp"
#include "resnorm/post_ln_block.hpp"
#include "resnorm/pre_ln_block.hpp"
#include "resnorm/random.hpp"
#include "resnorm/residual.hpp"
#include "resnorm/sequential.hpp"
