// RMSNorm on CPU, forward and backward, each one pass over memory.
//
// Why hand-written: a compiler fuses RMSNorm's row work (sum of squares, scale)
// into one loop, but its backward also needs the weight gradient, a sum down
// the columns. Inductor emits that as a second loop nest that reads dy and s
// again, so the training step moves 7 tensors' worth of memory where PyTorch's
// native LayerNorm moves 5. Here each thread keeps its own partial weight
// gradient while it walks its rows, as ATen's LayerNorm backward does, and the
// partials are added at the end: dy and s are read once.
//
// Layout: every tensor is row-major and contiguous, rows x d. `inverse` holds
// one value per row: 1/sqrt(ms + eps) (eps inside) or 1/(sqrt(ms) + eps).
// Statistics and sums are in T (float or double), as PyTorch's CPU kernels do
// for those dtypes. The caller (normlab/norms/backends/cpp/__init__.py) checks every argument.

#include <cmath>
#include <cstdint>
#include <vector>

#include <omp.h>

namespace {

// Below this many elements the threads cost more than they save.
constexpr int64_t kParallelMinElements = 1 << 15;

template <typename T>
std::vector<T> gain_of(const T* weight, int64_t d, T offset) {
    std::vector<T> gain(d, T(1));
    if (weight != nullptr) {
        for (int64_t j = 0; j < d; ++j) gain[j] = offset + weight[j];
    }
    return gain;
}

template <typename T>
void forward(const T* x, const T* residual, const T* weight, T* y, T* sum_out, T* inverse, int64_t rows,
             int64_t d, T eps, T offset, bool eps_inside, int threads) {
    const std::vector<T> gain_vector = gain_of(weight, d, offset);
    const T* gain = gain_vector.data();
#pragma omp parallel for num_threads(threads) schedule(static) if (rows * d >= kParallelMinElements)
    for (int64_t r = 0; r < rows; ++r) {
        const T* s = x + r * d;
        if (residual != nullptr) {
            const T* xr = x + r * d;
            const T* rr = residual + r * d;
            T* sr = sum_out + r * d;
#pragma omp simd
            for (int64_t j = 0; j < d; ++j) sr[j] = xr[j] + rr[j];
            s = sr;  // the norm reads the rounded, stored sum, as every other backend does
        }
        T squares = 0;
#pragma omp simd reduction(+ : squares)
        for (int64_t j = 0; j < d; ++j) squares += s[j] * s[j];
        const T ms = squares / T(d);
        const T inv = eps_inside ? T(1) / std::sqrt(ms + eps) : T(1) / (std::sqrt(ms) + eps);
        inverse[r] = inv;
        T* yr = y + r * d;
#pragma omp simd
        for (int64_t j = 0; j < d; ++j) yr[j] = s[j] * inv * gain[j];
    }
}

// dx_j = g_j * inv + dot * d(inv)/d(s_j), with g = dy * gain and dot = sum_k g_k s_k. That is
// g_j * inv - s_j * coef with coef = dot * inv^3 / d (eps inside the root) or dot * inv^2 / (rms * d)
// (eps outside; 0 where rms = 0, where the reference's gradient is 0 too).
template <typename T>
void backward(const T* dy, const T* dsum, const T* s, const T* weight, const T* inverse, T* dx, T* dweight,
              int64_t rows, int64_t d, T eps, T offset, bool eps_inside, int threads) {
    const std::vector<T> gain_vector = gain_of(weight, d, offset);
    const T* gain = gain_vector.data();
    const bool parallel = rows * d >= kParallelMinElements;
    const int team = parallel ? threads : 1;
    std::vector<T> partials(dweight != nullptr ? static_cast<size_t>(team) * d : 0, T(0));
#pragma omp parallel num_threads(team) if (parallel)
    {
        T* partial = dweight != nullptr ? partials.data() + static_cast<size_t>(omp_get_thread_num()) * d : nullptr;
#pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; ++r) {
            const T* dyr = dy + r * d;
            const T* sr = s + r * d;
            const T inv = inverse[r];
            T dot = 0;
#pragma omp simd reduction(+ : dot)
            for (int64_t j = 0; j < d; ++j) dot += dyr[j] * gain[j] * sr[j];
            T coef;
            if (eps_inside) {
                coef = dot * inv * inv * inv / T(d);
            } else {
                // rms from the row again (it is in cache): recovering it as 1/inv - eps cancels badly when rms << eps
                T squares = 0;
#pragma omp simd reduction(+ : squares)
                for (int64_t j = 0; j < d; ++j) squares += sr[j] * sr[j];
                const T rms = std::sqrt(squares / T(d));
                coef = rms > T(0) ? dot * inv * inv / (rms * T(d)) : T(0);
            }
            T* dxr = dx + r * d;
            const T* dsr = dsum != nullptr ? dsum + r * d : nullptr;
            if (dsr != nullptr) {
#pragma omp simd
                for (int64_t j = 0; j < d; ++j) dxr[j] = dyr[j] * gain[j] * inv - sr[j] * coef + dsr[j];
            } else {
#pragma omp simd
                for (int64_t j = 0; j < d; ++j) dxr[j] = dyr[j] * gain[j] * inv - sr[j] * coef;
            }
            if (partial != nullptr) {
#pragma omp simd
                for (int64_t j = 0; j < d; ++j) partial[j] += dyr[j] * sr[j] * inv;
            }
        }
    }
    if (dweight != nullptr) {
        for (int64_t j = 0; j < d; ++j) {
            T total = 0;
            for (int t = 0; t < team; ++t) total += partials[static_cast<size_t>(t) * d + j];
            dweight[j] = total;
        }
    }
}

}  // namespace

extern "C" {

void normlab_rms_forward_f32(const float* x, const float* residual, const float* weight, float* y, float* sum_out,
                             float* inverse, int64_t rows, int64_t d, double eps, double offset, int eps_inside,
                             int threads) {
    forward<float>(x, residual, weight, y, sum_out, inverse, rows, d, float(eps), float(offset), eps_inside != 0, threads);
}

void normlab_rms_forward_f64(const double* x, const double* residual, const double* weight, double* y,
                             double* sum_out, double* inverse, int64_t rows, int64_t d, double eps, double offset,
                             int eps_inside, int threads) {
    forward<double>(x, residual, weight, y, sum_out, inverse, rows, d, eps, offset, eps_inside != 0, threads);
}

void normlab_rms_backward_f32(const float* dy, const float* dsum, const float* s, const float* weight,
                              const float* inverse, float* dx, float* dweight, int64_t rows, int64_t d, double eps,
                              double offset, int eps_inside, int threads) {
    backward<float>(dy, dsum, s, weight, inverse, dx, dweight, rows, d, float(eps), float(offset), eps_inside != 0,
                    threads);
}

void normlab_rms_backward_f64(const double* dy, const double* dsum, const double* s, const double* weight,
                              const double* inverse, double* dx, double* dweight, int64_t rows, int64_t d, double eps,
                              double offset, int eps_inside, int threads) {
    backward<double>(dy, dsum, s, weight, inverse, dx, dweight, rows, d, eps, offset, eps_inside != 0, threads);
}

}  // extern "C"
