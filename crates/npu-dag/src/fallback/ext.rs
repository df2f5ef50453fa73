//! Kernels of the extended opset (`Op::Ext`), resolved like the rest of the dispatch: an
//! op this interpreter cannot run is refused here, before any operand exists.

use super::{
    conv, create, diag, intops, norm, pool, reduce_ext, reorder, resample, scatter, shape, sort,
};
use super::{many, one, Kernel, R};
use npu_ir::{ExtOp, Interp};

pub(super) fn kernel(op: &ExtOp) -> R<Kernel<'_>> {
    match op {
        ExtOp::Sort {
            dim,
            descending,
            indices_only,
        } => many(move |a| sort::sort(a, *dim, *descending, *indices_only)),
        ExtOp::TopK { k, dim, largest } => many(move |a| sort::topk(a, *k, *dim, *largest)),
        ExtOp::KthValue { k, dim, keepdim } => many(move |a| sort::kthvalue(a, *k, *dim, *keepdim)),
        ExtOp::Median { dim, keepdim } => many(move |a| sort::median(a, *dim, *keepdim)),
        ExtOp::Mode { dim, keepdim } => many(move |a| sort::mode(a, *dim, *keepdim)),
        ExtOp::CumExtreme { op, dim } => many(move |a| sort::cum_extreme(a, *op, *dim)),
        ExtOp::Cumprod { dim } => one(move |a| sort::cumprod(a, *dim)),
        ExtOp::Prod { dim, .. } => one(move |a| reduce_ext::prod(a, *dim)),
        ExtOp::AnyAll { all, dims, .. } => one(move |a| reduce_ext::any_all(a, *all, dims)),
        ExtOp::CountNonzero { dims } => one(move |a| reduce_ext::count_nonzero(a, dims)),
        ExtOp::Scatter {
            dim,
            value,
            reduce,
            include_self,
        } => one(move |a| scatter::scatter(a, *dim, *value, *reduce, *include_self)),
        ExtOp::TakeAlongDim { dim } => one(move |a| scatter::take_along_dim(a, *dim)),
        ExtOp::IntBinary { op, scalar } => one(move |a| intops::int_binary(a, *op, *scalar)),
        ExtOp::IndexPut {
            indexed,
            accumulate,
        } => one(move |a| scatter::index_put(a, indexed, *accumulate)),
        ExtOp::IndexAdd { dim, alpha } => one(move |a| scatter::index_add(a, *dim, *alpha)),
        ExtOp::IndexFill { dim, value } => one(move |a| scatter::index_fill(a, *dim, *value)),
        ExtOp::MaskedScatter => one(scatter::masked_scatter),
        ExtOp::SelectScatter { dim, index } => {
            one(move |a| scatter::select_scatter(a, *dim, *index))
        }
        ExtOp::SliceScatter {
            dim,
            start,
            end,
            step,
        } => one(move |a| scatter::slice_scatter(a, *dim, *start, *end, *step)),
        ExtOp::DiagonalScatter { offset, dim1, dim2 } => {
            one(move |a| scatter::diagonal_scatter(a, *offset, *dim1, *dim2))
        }
        ExtOp::MaxPool {
            window,
            with_indices,
        } => many(move |a| pool::max_pool(a, window, *with_indices)),
        ExtOp::AvgPool {
            window,
            count_include_pad,
            divisor_override,
        } => one(move |a| pool::avg_pool(a, window, *count_include_pad, *divisor_override)),
        ExtOp::AdaptivePool { max, output_size } => {
            let n = output_size.len();
            many(move |a| pool::adaptive_pool(a, n, *max))
        }
        ExtOp::Upsample {
            interp,
            align_corners,
            scales,
        } => {
            if *interp == Interp::Cubic && scales.len() != 2 {
                return Err(format!("bicubic upsampling over {} dims", scales.len()));
            }
            one(move |a| resample::upsample(a, *interp, *align_corners, scales))
        }
        ExtOp::GridSample {
            interp,
            padding,
            align_corners,
        } => {
            if *interp == Interp::Cubic {
                return Err("bicubic grid_sampler_2d is not supported".into());
            }
            one(move |a| resample::grid_sample(a, *interp, *padding, *align_corners))
        }
        ExtOp::Convolution {
            stride,
            padding,
            dilation,
            transposed,
            output_padding,
            groups,
        } => one(move |a| {
            conv::convolution(
                a,
                stride,
                padding,
                dilation,
                *transposed,
                output_padding,
                *groups,
            )
        }),
        ExtOp::PixelShuffle { factor, inverse } => {
            one(move |a| resample::pixel_shuffle(a, *factor, *inverse))
        }
        ExtOp::Flip { dims } => one(move |a| reorder::flip(a, dims)),
        ExtOp::Roll { shifts, dims } => one(move |a| reorder::roll(a, shifts, dims)),
        ExtOp::Rot90 { k, dims } => one(move |a| reorder::rot90(a, *k, *dims)),
        ExtOp::Pad { mode, pad, value } => one(move |a| reorder::pad(a, *mode, pad, *value)),
        ExtOp::Triangle { upper, diagonal } => one(move |a| diag::triangle(a, *upper, *diagonal)),
        ExtOp::Diag { diagonal } => one(move |a| diag::diag(a, *diagonal)),
        ExtOp::Diagonal { offset, dim1, dim2 } => {
            one(move |a| diag::diagonal(a, *offset, *dim1, *dim2))
        }
        ExtOp::DiagEmbed { offset, dim1, dim2 } => {
            one(move |a| diag::diag_embed(a, *offset, *dim1, *dim2))
        }
        ExtOp::Linspace { start, end, base } => one(move |a| {
            let mut next = 0;
            let mut take = |v: &Option<f64>| -> R<f64> {
                match v {
                    Some(v) => Ok(*v),
                    None => {
                        next += 1;
                        super::data::scalar_f64(a.input(next - 1)?)
                    }
                }
            };
            let (s, e) = (take(start)?, take(end)?);
            create::linspace(a, s, e, *base)
        }),
        ExtOp::Eye => one(diag::eye),
        ExtOp::NativeBatchNorm { eps, training } => {
            if *training {
                return Err("batch_norm in training mode is not supported".into());
            }
            many(move |a| norm::native_batch_norm(a, *eps))
        }
        ExtOp::NativeGroupNorm { groups, eps } => {
            many(move |a| norm::native_group_norm(a, *groups, *eps))
        }
        ExtOp::LogCumSumExp { dim } => one(move |a| sort::logcumsumexp(a, *dim)),
        ExtOp::TriangleIndices {
            row,
            col,
            offset,
            upper,
        } => one(move |a| diag::triangle_indices(a, *row, *col, *offset, *upper)),
        ExtOp::AsStrided { stride, offset } => {
            one(move |a| reorder::as_strided(a, stride, *offset))
        }
        ExtOp::EmbeddingRenorm {
            max_norm,
            norm_type,
        } => one(move |a| shape::embedding_renorm(a, *max_norm, *norm_type)),
        ExtOp::MaxPoolBackward { dims } => one(move |a| pool::max_pool_backward(a, *dims)),
        ExtOp::RepeatInterleave { dim, indices } => {
            one(move |a| reorder::repeat_interleave(a, *dim, *indices))
        }
    }
}
