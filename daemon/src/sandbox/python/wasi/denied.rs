//! The part of the Python guest's WASI imports that only ever refuses: sockets (a network
//! capability exists, but no socket can be created and no name resolved). Resources the guest
//! can never obtain have the uninhabited type [`Never`] as their representation, so their
//! methods cannot be reached.

use hyperlight_common::component::Negative as N;
use hyperlight_common::resource::BorrowedResourceGuard as B;

use super::{Network, Never, WasiHost};
use crate::sandbox::python::bindings::wasi::sockets;

use sockets::network::ErrorCode as NetError;

// --- wasi:sockets: a network capability exists, but no socket can be made ---------------

impl sockets::network::Network<N> for WasiHost {
    type T = Network;
}
impl sockets::Network<N> for WasiHost {}
impl sockets::InstanceNetwork<N, Network> for WasiHost {
    fn instance_network(&mut self) -> Network {
        self.call.resource_given();
        Network
    }
}
impl<A, P> sockets::IpNameLookup<N, NetError, A, Network, P> for WasiHost {
    fn resolve_addresses(
        &mut self,
        _network: B<'_, Network>,
        _name: String,
    ) -> Result<Never, NetError> {
        Err(NetError::AccessDenied)
    }
}
impl<D, I, S, O, P> sockets::Tcp<N, D, NetError, I, S, Network, O, P> for WasiHost {}
impl<F> sockets::TcpCreateSocket<N, NetError, F, Never> for WasiHost {
    fn create_tcp_socket(&mut self, _family: F) -> Result<Never, NetError> {
        Err(NetError::AccessDenied)
    }
}
impl<S, P> sockets::Udp<N, NetError, S, Network, P> for WasiHost {}
impl<F> sockets::UdpCreateSocket<N, NetError, F, Never> for WasiHost {
    fn create_udp_socket(&mut self, _family: F) -> Result<Never, NetError> {
        Err(NetError::AccessDenied)
    }
}

impl<Duration, ErrorCode, InputStream, IpSocketAddress, Network, OutputStream, Pollable>
    sockets::tcp::TcpSocket<
        N,
        Duration,
        ErrorCode,
        InputStream,
        IpSocketAddress,
        Network,
        OutputStream,
        Pollable,
    > for WasiHost
{
    type T = Never;
    fn start_bind(
        &mut self,
        self_: B<'_, Never>,
        _network: B<'_, sockets::tcp::Network<Network>>,
        _local_address: sockets::tcp::IpSocketAddress<IpSocketAddress>,
    ) -> Result<(), sockets::tcp::ErrorCode<ErrorCode>> {
        match *self_ {}
    }
    fn finish_bind(
        &mut self,
        self_: B<'_, Never>,
    ) -> Result<(), sockets::tcp::ErrorCode<ErrorCode>> {
        match *self_ {}
    }
    fn start_connect(
        &mut self,
        self_: B<'_, Never>,
        _network: B<'_, sockets::tcp::Network<Network>>,
        _remote_address: sockets::tcp::IpSocketAddress<IpSocketAddress>,
    ) -> Result<(), sockets::tcp::ErrorCode<ErrorCode>> {
        match *self_ {}
    }
    fn finish_connect(
        &mut self,
        self_: B<'_, Never>,
    ) -> Result<
        (
            sockets::tcp::InputStream<InputStream>,
            sockets::tcp::OutputStream<OutputStream>,
        ),
        sockets::tcp::ErrorCode<ErrorCode>,
    > {
        match *self_ {}
    }
    fn start_listen(
        &mut self,
        self_: B<'_, Never>,
    ) -> Result<(), sockets::tcp::ErrorCode<ErrorCode>> {
        match *self_ {}
    }
    fn finish_listen(
        &mut self,
        self_: B<'_, Never>,
    ) -> Result<(), sockets::tcp::ErrorCode<ErrorCode>> {
        match *self_ {}
    }
    fn accept(
        &mut self,
        self_: B<'_, Never>,
    ) -> Result<
        (
            Never,
            sockets::tcp::InputStream<InputStream>,
            sockets::tcp::OutputStream<OutputStream>,
        ),
        sockets::tcp::ErrorCode<ErrorCode>,
    > {
        match *self_ {}
    }
    fn local_address(
        &mut self,
        self_: B<'_, Never>,
    ) -> Result<sockets::tcp::IpSocketAddress<IpSocketAddress>, sockets::tcp::ErrorCode<ErrorCode>>
    {
        match *self_ {}
    }
    fn remote_address(
        &mut self,
        self_: B<'_, Never>,
    ) -> Result<sockets::tcp::IpSocketAddress<IpSocketAddress>, sockets::tcp::ErrorCode<ErrorCode>>
    {
        match *self_ {}
    }
    fn is_listening(&mut self, self_: B<'_, Never>) -> bool {
        match *self_ {}
    }
    fn set_listen_backlog_size(
        &mut self,
        self_: B<'_, Never>,
        _value: u64,
    ) -> Result<(), sockets::tcp::ErrorCode<ErrorCode>> {
        match *self_ {}
    }
    fn keep_alive_enabled(
        &mut self,
        self_: B<'_, Never>,
    ) -> Result<bool, sockets::tcp::ErrorCode<ErrorCode>> {
        match *self_ {}
    }
    fn set_keep_alive_enabled(
        &mut self,
        self_: B<'_, Never>,
        _value: bool,
    ) -> Result<(), sockets::tcp::ErrorCode<ErrorCode>> {
        match *self_ {}
    }
    fn keep_alive_idle_time(
        &mut self,
        self_: B<'_, Never>,
    ) -> Result<sockets::tcp::Duration<Duration>, sockets::tcp::ErrorCode<ErrorCode>> {
        match *self_ {}
    }
    fn set_keep_alive_idle_time(
        &mut self,
        self_: B<'_, Never>,
        _value: sockets::tcp::Duration<Duration>,
    ) -> Result<(), sockets::tcp::ErrorCode<ErrorCode>> {
        match *self_ {}
    }
    fn keep_alive_interval(
        &mut self,
        self_: B<'_, Never>,
    ) -> Result<sockets::tcp::Duration<Duration>, sockets::tcp::ErrorCode<ErrorCode>> {
        match *self_ {}
    }
    fn set_keep_alive_interval(
        &mut self,
        self_: B<'_, Never>,
        _value: sockets::tcp::Duration<Duration>,
    ) -> Result<(), sockets::tcp::ErrorCode<ErrorCode>> {
        match *self_ {}
    }
    fn keep_alive_count(
        &mut self,
        self_: B<'_, Never>,
    ) -> Result<u32, sockets::tcp::ErrorCode<ErrorCode>> {
        match *self_ {}
    }
    fn set_keep_alive_count(
        &mut self,
        self_: B<'_, Never>,
        _value: u32,
    ) -> Result<(), sockets::tcp::ErrorCode<ErrorCode>> {
        match *self_ {}
    }
    fn hop_limit(&mut self, self_: B<'_, Never>) -> Result<u8, sockets::tcp::ErrorCode<ErrorCode>> {
        match *self_ {}
    }
    fn set_hop_limit(
        &mut self,
        self_: B<'_, Never>,
        _value: u8,
    ) -> Result<(), sockets::tcp::ErrorCode<ErrorCode>> {
        match *self_ {}
    }
    fn receive_buffer_size(
        &mut self,
        self_: B<'_, Never>,
    ) -> Result<u64, sockets::tcp::ErrorCode<ErrorCode>> {
        match *self_ {}
    }
    fn set_receive_buffer_size(
        &mut self,
        self_: B<'_, Never>,
        _value: u64,
    ) -> Result<(), sockets::tcp::ErrorCode<ErrorCode>> {
        match *self_ {}
    }
    fn send_buffer_size(
        &mut self,
        self_: B<'_, Never>,
    ) -> Result<u64, sockets::tcp::ErrorCode<ErrorCode>> {
        match *self_ {}
    }
    fn set_send_buffer_size(
        &mut self,
        self_: B<'_, Never>,
        _value: u64,
    ) -> Result<(), sockets::tcp::ErrorCode<ErrorCode>> {
        match *self_ {}
    }
    fn subscribe(&mut self, self_: B<'_, Never>) -> sockets::tcp::Pollable<Pollable> {
        match *self_ {}
    }
    fn shutdown(
        &mut self,
        self_: B<'_, Never>,
        _shutdown_type: sockets::tcp::ShutdownType,
    ) -> Result<(), sockets::tcp::ErrorCode<ErrorCode>> {
        match *self_ {}
    }
}

impl<ErrorCode, IncomingDatagramStream, IpSocketAddress, Network, OutgoingDatagramStream, Pollable>
    sockets::udp::UdpSocket<
        N,
        ErrorCode,
        IncomingDatagramStream,
        IpSocketAddress,
        Network,
        OutgoingDatagramStream,
        Pollable,
    > for WasiHost
{
    type T = Never;
    fn start_bind(
        &mut self,
        self_: B<'_, Never>,
        _network: B<'_, sockets::udp::Network<Network>>,
        _local_address: sockets::udp::IpSocketAddress<IpSocketAddress>,
    ) -> Result<(), sockets::udp::ErrorCode<ErrorCode>> {
        match *self_ {}
    }
    fn finish_bind(
        &mut self,
        self_: B<'_, Never>,
    ) -> Result<(), sockets::udp::ErrorCode<ErrorCode>> {
        match *self_ {}
    }
    fn stream(
        &mut self,
        self_: B<'_, Never>,
        _remote_address: Option<sockets::udp::IpSocketAddress<IpSocketAddress>>,
    ) -> Result<(IncomingDatagramStream, OutgoingDatagramStream), sockets::udp::ErrorCode<ErrorCode>>
    {
        match *self_ {}
    }
    fn local_address(
        &mut self,
        self_: B<'_, Never>,
    ) -> Result<sockets::udp::IpSocketAddress<IpSocketAddress>, sockets::udp::ErrorCode<ErrorCode>>
    {
        match *self_ {}
    }
    fn remote_address(
        &mut self,
        self_: B<'_, Never>,
    ) -> Result<sockets::udp::IpSocketAddress<IpSocketAddress>, sockets::udp::ErrorCode<ErrorCode>>
    {
        match *self_ {}
    }
    fn unicast_hop_limit(
        &mut self,
        self_: B<'_, Never>,
    ) -> Result<u8, sockets::udp::ErrorCode<ErrorCode>> {
        match *self_ {}
    }
    fn set_unicast_hop_limit(
        &mut self,
        self_: B<'_, Never>,
        _value: u8,
    ) -> Result<(), sockets::udp::ErrorCode<ErrorCode>> {
        match *self_ {}
    }
    fn receive_buffer_size(
        &mut self,
        self_: B<'_, Never>,
    ) -> Result<u64, sockets::udp::ErrorCode<ErrorCode>> {
        match *self_ {}
    }
    fn set_receive_buffer_size(
        &mut self,
        self_: B<'_, Never>,
        _value: u64,
    ) -> Result<(), sockets::udp::ErrorCode<ErrorCode>> {
        match *self_ {}
    }
    fn send_buffer_size(
        &mut self,
        self_: B<'_, Never>,
    ) -> Result<u64, sockets::udp::ErrorCode<ErrorCode>> {
        match *self_ {}
    }
    fn set_send_buffer_size(
        &mut self,
        self_: B<'_, Never>,
        _value: u64,
    ) -> Result<(), sockets::udp::ErrorCode<ErrorCode>> {
        match *self_ {}
    }
    fn subscribe(&mut self, self_: B<'_, Never>) -> sockets::udp::Pollable<Pollable> {
        match *self_ {}
    }
}

impl<ErrorCode, IpSocketAddress, Pollable>
    sockets::udp::IncomingDatagramStream<N, ErrorCode, IpSocketAddress, Pollable> for WasiHost
{
    type T = Never;
    fn receive(
        &mut self,
        self_: B<'_, Never>,
        _max_results: u64,
    ) -> Result<
        Vec<sockets::udp::IncomingDatagram<IpSocketAddress>>,
        sockets::udp::ErrorCode<ErrorCode>,
    > {
        match *self_ {}
    }
    fn subscribe(&mut self, self_: B<'_, Never>) -> sockets::udp::Pollable<Pollable> {
        match *self_ {}
    }
}

impl<ErrorCode, IpSocketAddress, Pollable>
    sockets::udp::OutgoingDatagramStream<N, ErrorCode, IpSocketAddress, Pollable> for WasiHost
{
    type T = Never;
    fn check_send(
        &mut self,
        self_: B<'_, Never>,
    ) -> Result<u64, sockets::udp::ErrorCode<ErrorCode>> {
        match *self_ {}
    }
    fn send(
        &mut self,
        self_: B<'_, Never>,
        _datagrams: Vec<sockets::udp::OutgoingDatagram<IpSocketAddress>>,
    ) -> Result<u64, sockets::udp::ErrorCode<ErrorCode>> {
        match *self_ {}
    }
    fn subscribe(&mut self, self_: B<'_, Never>) -> sockets::udp::Pollable<Pollable> {
        match *self_ {}
    }
}

impl<ErrorCode, IpAddress, Pollable>
    sockets::ip_name_lookup::ResolveAddressStream<N, ErrorCode, IpAddress, Pollable> for WasiHost
{
    type T = Never;
    fn resolve_next_address(
        &mut self,
        self_: B<'_, Never>,
    ) -> Result<
        Option<sockets::ip_name_lookup::IpAddress<IpAddress>>,
        sockets::ip_name_lookup::ErrorCode<ErrorCode>,
    > {
        match *self_ {}
    }
    fn subscribe(&mut self, self_: B<'_, Never>) -> sockets::ip_name_lookup::Pollable<Pollable> {
        match *self_ {}
    }
}
